"""Small example controllers built on the Steward runtime."""
