"""add-subdomain: alias a name inside an existing hosted zone to the zone's apex.

``input.py``: the input contract, its canonical form and the lane; ``stages.py``: the stages.
"""

from workflows.add_subdomain import stages
from workflows.add_subdomain.input import AddSubdomain

workflow = AddSubdomain(stages)
