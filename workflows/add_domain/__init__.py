"""add-domain: certificate (child add-certificate), DNS alias records and platform routing.

``input.py``: the input contract, its canonical form and the lane; ``stages.py``: the stages.
"""

from workflows.add_domain import stages
from workflows.add_domain.input import AddDomain

workflow = AddDomain(stages)
