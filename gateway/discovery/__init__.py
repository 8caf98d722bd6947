"""Where pools get their endpoints at run time: Kubernetes EndpointSlices and labelled Services."""
