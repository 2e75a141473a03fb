"""Data-value scoring: perplexity/IFD, heuristics, diversity, safety; diverse selection."""
