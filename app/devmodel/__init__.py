"""runq's development model: a small deterministic OpenAI-compatible chat model on 127.0.0.1.

``runq dev`` (``make run``) starts it when no model is configured, so every walkthrough runs
without a key; the tests' scripted fake and the bench's model servers share its wire format
(:mod:`app.devmodel.wire`). What it answers: :mod:`app.devmodel.replies`, docs/dev-model.md.
"""
