"""The web admin console under /admin/ui/ (gateway/console/routes.py): server-rendered pages over the
admin API's own store, validation and audit journal."""
