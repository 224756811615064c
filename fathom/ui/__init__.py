"""`fathom ui`: a Gradio page that runs one RLM episode on a served model and shows its tree as it grows."""
