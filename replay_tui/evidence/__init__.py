"""Evidence bundles: a self-contained, checkable folder that says how a run was trained.

``export`` writes the folder (manifests, comparison, gaps, logs, a human report, a
``SHA256SUMS`` list and an in-toto Statement in a DSSE envelope, signed with Ed25519 when
a key is given); ``verify`` re-hashes every file and checks the signature offline.
"""

from __future__ import annotations
