-- Results(): each contestant's name, number and total votes, most votes first (ties by
-- number, then name), as VoltDB's Voter example's Results class answers. Multi-partition.
local results = sql [[SELECT a.contestant_name AS contestant_name,
       a.contestant_number AS contestant_number,
       SUM(b.num_votes) AS total_votes
  FROM v_votes_by_contestant_number_state AS b, contestants AS a
 WHERE a.contestant_number = b.contestant_number
 GROUP BY a.contestant_name, a.contestant_number
 ORDER BY total_votes DESC, contestant_number ASC, contestant_name ASC]]

return function()
  return results:query()
end
