"""Checkpoint files, below both capture and compare: what one is and how it is opened
(``formats``, ``opening``), how its nested object becomes named leaves (``leaves``), how
its bytes are read without torch (``unpickler``, ``reader``), and its tensor-content
digest (``digest``).  The comparison of two checkpoints is ``compare.tensors``.

torch and safetensors are imported inside functions only: importing any module here
stays cheap.
"""
