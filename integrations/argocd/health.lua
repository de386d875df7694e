-- Argo CD health check for releaseplan.io/ReleasePlan.
-- Install it in argocd-cm under
--   resource.customizations.health.releaseplan.io_ReleasePlan
-- (see the README). tests/it/consumers.rs runs this file in gopher-lua, the way
-- Argo CD does, against live plans in every state. It uses only the base
-- library: Argo CD does not open the string library by default.
local hs = {}

local function condition(type)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end

local function said(c)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  if obj.status.message ~= nil then
    return obj.status.message
  end
  return ""
end

-- Not reconciled yet: the operator is down, not installed, or behind. (The
-- CRD defaults status to {observedGeneration: 0} until the operator writes it.)
if obj.status == nil or obj.status.observedGeneration == nil or
    obj.status.observedGeneration == 0 then
  hs.status = "Progressing"
  hs.message = "The releaseplan operator has not reconciled this plan yet"
  return hs
end
if obj.status.observedGeneration ~= obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "The releaseplan operator has not reconciled generation " ..
    obj.metadata.generation .. " yet (status is of generation " ..
    obj.status.observedGeneration .. ")"
  return hs
end

-- Needs a human: halted (RolloutHalted), rolled back (RolledBack), slow
-- rollback (RollbackSlow), invalid spec (InvalidSpec), template refused by
-- the API server (DeploymentRefused), gate or route refused by the
-- GatePolicy (GatePolicyRefused).
local stalled = condition("Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = stalled.reason .. ": " .. said(stalled)
  return hs
end
if obj.status.phase == "RolledBack" then
  hs.status = "Degraded"
  hs.message = said(nil)
  return hs
end

-- Held by a human: spec.paused (SpecPaused), a pause request
-- (PauseRequested), or a `pause: {}` step waiting for promotion (PauseStep).
local paused = condition("Paused")
if (paused ~= nil and paused.status == "True") or
    (obj.spec.paused == true and obj.status.phase == "RollingOut") then
  hs.status = "Suspended"
  hs.message = said(nil)
  return hs
end

if obj.status.phase == "Stable" then
  hs.status = "Healthy"
  hs.message = said(nil)
  return hs
end

-- RollingOut, RollbackInProgress, Pending, or a phase this script does not
-- know yet.
hs.status = "Progressing"
hs.message = said(nil)
return hs
