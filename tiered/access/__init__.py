"""Who may read what, on both ports: accounts (:mod:`.accounts`), TLS (:mod:`.tls`), the guard
against guessing and the audit of refusals (:mod:`.guard`), and the service that reloads the
files when they change (:mod:`.security`). Imported by :mod:`tiered.http` and
:mod:`tiered.remoting`; it knows nothing of either.
"""
