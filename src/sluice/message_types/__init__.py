"""Message type definition languages, mapped onto JSON Schema for body validation."""
