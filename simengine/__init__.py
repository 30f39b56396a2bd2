from runtime.deferred_ca import install as _defer_ca_loading

_defer_ca_loading()  # aiohttp loads the CA bundle on first TLS use, not at import
