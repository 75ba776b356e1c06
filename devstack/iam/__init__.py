"""IAM on this machine: the local stack refuses what IAM refuses.

    policy   IAM's evaluation of a request against identity, resource and trust policies
    actions  what each API operation is authorised as (actions, resource ARNs, condition keys)
    roles    the template's roles, policies and resource policies, resolved for a stack's shape
    guard    the check in each function's process, before any call leaves it

The local stack (devstack.stack.DevStack) resolves the template's IAM for its parameters and
starts each function with its role's guard; every decision is recorded, and
`DevStack.iam_refusals()` lists the calls a role would have been refused in AWS.
"""
