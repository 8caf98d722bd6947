"""Workers that Sluicegate routes to: the fake worker here, real engines elsewhere."""
