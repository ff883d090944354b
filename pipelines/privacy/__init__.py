"""Privacy: pseudonymised personal data, the key store, identities, erasure."""
