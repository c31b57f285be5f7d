"""Dtypes of onepath: ml_dtypes' ``bfloat16`` is the user-facing BFloat16 (conversions and promotion
rules arrive with the BF16 kernels)."""
