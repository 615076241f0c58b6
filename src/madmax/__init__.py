"""madmax: predict how fast large ML models train and serve on distributed GPU systems."""

__version__ = "0.1.0"
