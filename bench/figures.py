"""Formatting shared by the summaries of bench/meta.sh and bench/data.sh."""


def fmt(v):
    """A rate for a table cell: 3 significant digits, k and M suffixes."""
    if v is None:
        return "-"
    if v >= 1e6:
        return "%.2fM" % (v / 1e6)
    if v >= 1e4:
        return "%.1fk" % (v / 1e3)
    if v >= 100:
        return "%.0f" % v
    return "%.3g" % v


def ratio(a, b):
    """a / b, or None when either is missing or zero."""
    return a / b if a and b else None


def rfmt(r):
    """A ratio for a table cell."""
    return "-" if r is None else "%.2fx" % r
