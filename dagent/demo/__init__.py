"""The demo's parts: pure views (`views`: markdown and HTML from tasks, tool results, grades,
conversations and token chains), per-tab sessions over real episodes, capture and engines
(`session`), and recorded rollouts read back (`recording`). `app.py` is the Gradio shell over
them; nothing here imports gradio.
"""
