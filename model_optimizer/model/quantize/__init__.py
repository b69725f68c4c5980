"""Weight quantization: methods (QuantMethod), checkpoint layouts, AWQ calibration, accuracy evaluation."""
