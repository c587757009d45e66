"""The pages, one module per area, like ``console/api/routes``."""
