"""TANK's bytes: primitives, frames, bundles and the request/response codecs. No sockets, no threads."""
