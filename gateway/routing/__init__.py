"""Model name -> pool of worker endpoints -> one endpoint, by a routing policy."""
