"""Steward's bootstrap token controllers: bootstrapsigner and tokencleaner."""
