"""A real glance-api under uWSGI or eventlet, driven by real clients."""
