"""Trace formats: the columns of kernel, engine, lengths and stage traces, their strict reader and writer."""
