"""`mopt tune`: search serve settings for the Pareto front of goodput, latency, memory and cold start.

space.py (knobs), trial.py (one measured server), predictor.py (the analytic model, with model_cost.py,
step_fit.py and server_memory.py), tuner.py (the search loop), study.py (the optuna study on SQLite),
samplers.py, objectives.py, budget.py, pareto.py, report.py / html.py (outputs), commands.py (mopt / vllm
command lines).
"""
