"""A service's serving side on the controller: the router that takes requests and hands them to replicas."""
