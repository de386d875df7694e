-- Argo CD resource action discovery for releaseplan.io/ReleasePlan: every
-- action of `kubectl releaseplan`, greyed out where the operator would
-- ignore it. The rule is the operator's own (Action::applies_in in
-- crates/core/src/plan/request.rs): tests/it/consumers.rs checks on live plans that both
-- agree. Base library only, as Argo CD runs it.
local actions = {}
local phase = ""
local halted = false
local pauseRequested = false
local awaitsDecision = false
if obj.status ~= nil then
  phase = obj.status.phase or ""
  halted = phase == "RollingOut" and obj.status.failure ~= nil
  pauseRequested = obj.status.pauseRequested == true
  -- Paused on a gate past its inconclusiveLimit (not a dry run): a human
  -- promotes, retries or aborts.
  if phase == "RollingOut" and not halted and obj.status.gates ~= nil then
    for _, g in ipairs(obj.status.gates) do
      if g.awaitingDecision == true and g.dryRun ~= true then
        awaitsDecision = true
      end
    end
  end
end
local rolling = phase == "RollingOut"
actions["promote"] = {["disabled"] = not rolling or halted}
actions["promote-full"] = {["disabled"] = not rolling or halted}
actions["abort"] = {["disabled"] = not rolling}
actions["retry"] = {["disabled"] = not (phase == "RolledBack" or halted or awaitsDecision)}
actions["pause"] = {["disabled"] = pauseRequested}
actions["resume"] = {["disabled"] = not pauseRequested}
return actions
