"""Presentation: terminal tables, Perfetto traces, plots. The only place that converts SI units for display."""
