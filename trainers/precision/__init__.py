"""Numeric formats, quantizers and the quantized linear layer (torch)."""
