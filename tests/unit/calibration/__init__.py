"""`day0 calibrate` and `day0.calibration`."""
