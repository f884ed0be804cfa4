"""The instructor's side: generate learner notebooks, restore check cells, grade submissions."""
