"""OpenAI-compatible HTTP server over the async engine (`mopt serve`); see app.create_app."""
