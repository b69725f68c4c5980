"""Model building blocks: each layer owns its weights and knows how to load them."""
