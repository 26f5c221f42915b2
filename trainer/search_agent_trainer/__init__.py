"""Search Agent Studio's trainer (DESIGN §2, §4.5).

The training loop, policies, rollout, advantages and losses land with the trainer issue; until then this
package only reports its environment (``python -m search_agent_trainer --check``), which the extension and
the CLI use to find a Python that can train.
"""

__version__ = "0.1.0"
