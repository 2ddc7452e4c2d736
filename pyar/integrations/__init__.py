"""pyar for training: gradient buckets with overlap, compression transforms, PyTorch."""
