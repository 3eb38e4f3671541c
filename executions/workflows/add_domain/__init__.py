"""add-domain: certificate (child add-certificate), DNS alias records and platform routing.

``input.py``: the input contract, its canonical form and the lane.
"""

from executions.workflows.add_domain.input import AddDomain

workflow = AddDomain()
