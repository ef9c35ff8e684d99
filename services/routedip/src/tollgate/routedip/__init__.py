"""tollgate.routedip: routed IPs kept on an eligible node backing a Service, with firewall ports."""
