"""onboard-domain: create the hosted zone, then everything add-domain does.

``input.py``: the input contract, its canonical form and the lane; ``stages.py``: the stages.
"""

from workflows.onboard_domain import stages
from workflows.onboard_domain.input import OnboardDomain

workflow = OnboardDomain(stages)
