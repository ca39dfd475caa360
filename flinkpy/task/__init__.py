"""The task process: input channels, the operator chain, record writers."""
