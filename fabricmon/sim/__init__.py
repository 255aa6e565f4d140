"""The simulated fabric (ibsim + opensm harness) and the demo built on it."""
