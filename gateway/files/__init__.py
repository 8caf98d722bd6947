"""Where uploaded files and batch outputs live: one narrow interface (`storage.FileStorage`) and one
module per backend (`directory.py` for `file://`, `s3.py` for `s3://`), chosen by
`SLUICEGATE_FILES_URL` in `storage.open_storage`."""
