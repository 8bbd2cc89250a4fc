"""Unit tests, one folder per step or library of the code they test."""
