"""Python front ends of the kernels: argument checking, numpy semantics, dispatch, verbose lines."""
