"""`mopt tune`: search serve settings for the Pareto front of goodput, latency, memory and cold start.

space.py (knobs), trial.py (one measured server), predictor.py (the analytic model), study.py (the
optuna study on SQLite), pareto.py, report.py / html.py (outputs), commands.py (mopt / vllm command lines).
"""
