"""Input schemas, unit parsing and loaders: the first layer of madmax; imports nothing else of it."""
