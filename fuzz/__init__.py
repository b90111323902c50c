"""Fuzzing of the MMV reader (see fuzz/README.md)."""
