"""The architecture: import layers, the step registry against the step folders, the wheel's contents."""
