"""Realistic DataHub test data: aspect histories in the three wire forms, and simulated actor activity."""
