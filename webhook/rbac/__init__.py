"""The RBAC wing: may the requester use the HardwareProfile and accelerator types its pod is placed on."""
