"""Serving: the HTTP audit search API, its tokens and the search code path."""
