-- Transfer(from_id, to_id, amount): moves amount from one account to another, both or
-- neither. Returns 0 when done, 1 when the source account lacks the money (nothing
-- changes). Unknown accounts and a transfer to the same account abort. Multi-partition:
-- the two accounts may live on any partitions.
local debit  = sql [[UPDATE account SET balance = balance - ? WHERE id = ? AND balance >= ?]]
local credit = sql [[UPDATE account SET balance = balance + ? WHERE id = ?]]
local exists = sql [[SELECT id FROM account WHERE id = ?]]

local DONE, INSUFFICIENT_FUNDS = 0, 1

return function(from_id, to_id, amount)
  if from_id == to_id then abort("a transfer needs two different accounts") end
  if amount <= 0 then abort("the amount must be positive") end
  if debit:exec(amount, from_id, amount) == 0 then
    if not exists:values(from_id) then abort("no account " .. from_id) end
    return INSUFFICIENT_FUNDS
  end
  if credit:exec(amount, to_id) == 0 then abort("no account " .. to_id) end
  return DONE
end
