class ParseError(ValueError):
    """Raised when tool output cannot be parsed."""
