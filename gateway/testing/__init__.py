"""Test modes the gateway ships: code that runs only when a test harness turns it on."""
