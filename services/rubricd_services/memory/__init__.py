"""The evaluation memory in Weaviate: the store, the embedder, what it remembers of rubric updates."""
