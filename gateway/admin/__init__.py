"""The admin API: teams, keys, usage and models, behind the admin token."""
