"""Attention kernels: Triton for the GPU, each beside the pure-torch reference it is tested against."""
