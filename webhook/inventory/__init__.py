"""The read-only inventory: the cluster's GPUs, what they are used for and what they cost, for
`/api/v1/hardware-profiles`, `/nodes`, `/tenants`, `/costs` and `kgwe costs` (see docs/inventory.md).

One pass over the snapshot's nodes and pods (`capacity.Inventory`, O(nodes + pods)) collects everything
the views need into per-type and per-node indexes; a view then costs O(types + profiles) (the node view
O(nodes), as it lists them). `cache.InventoryCache` keeps one `Inventory` and the rendered views per
snapshot generation and configuration, so concurrent callers get the same bytes.

    capacity.py    the one pass: capacity, use and pending demand per type, use per node, pod costs
    profiles.py    the HardwareProfile view and a profile's unit price
    nodes.py       the node view and the per-type capacity summary
    tenants.py     the tenant view (quota use) and `tenant_usage`
    chargeback.py  the cost view: hourly, daily and monthly rate by tenant and type
    numbers.py     how the views write numbers, prices, money and times
    cache.py       the per-generation cache and its on-demand rebuild task
"""
